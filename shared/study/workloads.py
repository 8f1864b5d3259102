"""The workloads' earlier place: `shared.study.workloads` is `shared.measure.workloads` itself, and warns."""

from ..deprecation import moved_module

moved_module(__name__, "shared.measure.workloads")
