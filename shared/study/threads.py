"""The thread settings' earlier place: `shared.study.threads` is `shared.measure.threads` itself, and warns."""

from ..deprecation import moved_module

moved_module(__name__, "shared.measure.threads")
