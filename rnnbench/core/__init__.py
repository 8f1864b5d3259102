"""The bottom layer: what every implementation agrees on, with no framework imported.

`spec` (RNNSpec: a configuration), `params` (the canonical parameters: PyTorch's state_dict),
`catalogue` (the cells and their equations), `precision` (the precision axis), `tolerances`
(the rounding-error bound), `capabilities` (what a rung computes, and the one check),
`registry` (the one table of implementations), `adapter` (the protocols the harness talks to),
`cell_modules` (users' own cells in other processes), `tasks` (the training tasks).
"""
