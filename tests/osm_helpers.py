"""Helpers of the OSM input tests: write an OSM file's data as PBF (pyosmium)."""

from __future__ import annotations

from pathlib import Path

import osmium


def write_pbf(src: Path, dst: Path) -> Path:
    """Copy every node, way and relation of ``src`` (XML, possibly gz/bz2) into the PBF file
    ``dst``, in the source's order."""
    with osmium.SimpleWriter(str(dst), overwrite=True) as writer:
        for obj in osmium.FileProcessor(str(src)):
            writer.add(obj)
    return dst
