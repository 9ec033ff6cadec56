"""The optional C extension quiver._speedups; everything else is in pyproject.toml.

`optional=True`: where no compiler or Python headers exist the build says so and the
install goes on without it (quiver.wire.speedups then runs the Python reference).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("quiver._speedups", ["sdk/quiver/_speedups.c"], optional=True)])
