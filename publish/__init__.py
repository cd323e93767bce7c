"""flyconfigs.publish: building data packages from folders of artifacts and uploading them.

:mod:`.layout` lays out a package's files (names, manifest, entry point), :mod:`.build`
builds and checks the sdist and wheel and uploads them, :mod:`.index` reads the
versions a package index already holds.  It sits above the registry: nothing in the
loader's path imports it.
"""
