"""Mergeable column statistics (:mod:`._stats`) and the checks on them (:mod:`._drift`).

A profile is collected per work unit, merged per file and across files, and written as
``profile.json``; drift and normalisation checks compare it with the schema's reference.
"""

from __future__ import annotations

from datacheck.profile._stats import load_profile

__all__ = ["load_profile"]
