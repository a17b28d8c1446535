"""Tools as the runtime offers them to a model: definitions, registry, schemas, validation."""

from effectguard.runtime.tools.definition import ToolDefinition
from effectguard.runtime.tools.registry import ToolLike, ToolRegistry
from effectguard.runtime.tools.schema import function_schema, parse_docstring

__all__ = ["ToolDefinition", "ToolLike", "ToolRegistry", "function_schema", "parse_docstring"]
