"""The user's schema -> per-column rules and schema findings.

:mod:`._pandera` reads pandera schemas (YAML or ``module:attr``) and compiles their columns;
:mod:`._tensors` reads the ``tensors:`` section for tensor files.
"""

from __future__ import annotations

from datacheck.schema._pandera import CompiledSchema, compile_schema, load_schema

__all__ = ["CompiledSchema", "compile_schema", "load_schema"]
