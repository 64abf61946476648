"""Planning: runtime values -> layouts -> tiles -> the descriptor of visible tiles the kernels walk.

`layout` validates runtime values and lays each sequence out, `tiling` cuts it into query and key tiles,
`intervals` is the interval arithmetic the search uses, `exact` decides single pairs, and `planner`
searches (query tile x key tiles) boxes and writes the descriptor and the kernels' tables.
"""

from maskc.plan.planner import (
                                 MAX_DESCRIPTOR_BYTES,
                                 Descriptor,
                                 KernelTables,
                                 PlanError,
                                 TileConfig,
                                 kernel_tables,
                                 plan,
)

__all__ = ["MAX_DESCRIPTOR_BYTES", "Descriptor", "KernelTables", "PlanError", "TileConfig", "kernel_tables", "plan"]
