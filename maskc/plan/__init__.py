"""Planning: runtime values -> layouts -> tiles -> the descriptor of visible tiles the kernels walk.

`layout` validates runtime values and lays each sequence out, `tiling` cuts it into query and key tiles,
`intervals` is the interval arithmetic the search uses, `exact` decides single pairs, `planner`
searches (query tile x key tiles) boxes and writes the descriptor and the kernels' tables, and `rows` is
its fast path for masks made of row intervals (the same descriptor in closed form).

This package imports none of them: code generation needs the tile shapes (`tiling`) but must not load the
runtime values (`layout`) or the planner, so each user imports the module it needs.
"""
