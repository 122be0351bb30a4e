"""Only what pyproject.toml cannot say: the wheel carries a native library (libhostfirst, copied in by
scripts/wheel.sh), so it is a platform wheel, not py3-none-any; it loads the library with ctypes and uses no
CPython ABI, so its tags are py3-none-<platform>. scripts/wheel.sh then has auditwheel give it the manylinux tag."""

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the library inside: install into platlib, tag for a platform
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
