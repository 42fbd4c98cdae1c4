from aicr_runner.cli import program

program()
