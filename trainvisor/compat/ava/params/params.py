"""`from ava.params import params`: the AVA SDK's path to the same calls (`params.get_value`)."""
from . import PARAMS_ENV, ParamsError, get_all, get_value, params_file

__all__ = ["PARAMS_ENV", "ParamsError", "get_all", "get_value", "params_file"]
