"""The compiled modules: typed modules on the per-message path, compiled with mypyc when
the package is installed (``pip install`` runs this; gcc and the Python headers are all it
needs besides the build requirements of pyproject.toml). Everything else about the
distribution is in pyproject.toml.

Each compiled module keeps its ``.py`` as the one source: the extension is built from it
and placed beside it, where Python's import prefers it. ``LMQ_NO_EXTENSIONS=1`` skips the
build (a machine without a C compiler), and at run time makes the packages import the
``.py`` sources instead (:mod:`protocol._sources`); CI runs the protocol tests both ways.
"""

import os

from setuptools import setup

#: Compiled with mypyc: the module must type-check under mypy and not rely on what
#: mypyc forbids (monkeypatching its functions, a ``ClassVar`` with a value in a slotted
#: dataclass, ...). Add a module here and it is compiled at the next install.
COMPILED = [
    "protocol/mqtt/codec.py",
    "protocol/mqtt/connection.py",
    "protocol/mqtt/primitives.py",
    "protocol/remoting/command.py",
    "protocol/remoting/frames.py",
    "protocol/grpc/framing.py",
    "protocol/grpc/messages.py",
    "protocol/grpc/server.py",
    "protocol/http1/connection.py",
]

#: Written in C (no Python twin to compile): the record walk of the Spark reader
#: (spark/_walk.c; spark/columnar.py falls back to the same walk in Python without it).
C_EXTENSIONS = {
    "spark._walk": "spark/_walk.c",
}

if os.environ.get("LMQ_NO_EXTENSIONS"):
    ext_modules = []
else:
    from mypyc.build import mypycify
    from setuptools import Extension

    ext_modules = mypycify(COMPILED, opt_level="3") + [
        Extension(name, [source], extra_compile_args=["-O3"])
        for name, source in C_EXTENSIONS.items()
    ]

setup(ext_modules=ext_modules)
