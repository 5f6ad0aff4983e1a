"""Metadata lives in setup.cfg; this file only declares the optional C speedup.

`optional=True`: without a compiler the install still succeeds and the Caffe
parser runs its pure-Python loop (same results, slower).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trainvisor.parsers._caffe_speedups",
            ["trainvisor/parsers/_caffe_speedups.c"],
            optional=True,
        )
    ]
)
