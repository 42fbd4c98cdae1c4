"""``aicr-runner mirror``: everything an install of a recipe needs, listed (and copied).

Layers: ``items`` (what a listed thing is), ``images`` (image references found in
rendered manifests and in the custom resources operators read), ``render`` (the
component charts rendered with the bundle's values, behind a small interface),
``collect`` (the whole list of one release), ``formats`` (table, JSON, Hauler,
Zarf), ``aicr_list`` (aicr's own ``mirror list`` where the aicr has one, compared),
``command`` (the subcommand's flow).
"""

#: ``mirror -o``: what the list is printed as (here, so the command line needs no import to offer them).
FORMATS = ("table", "json", "hauler", "zarf")
