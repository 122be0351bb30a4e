"""Only what pyproject.toml cannot say: the wheel carries native code (libhostfirst, copied in by scripts/wheel.sh,
and the extension hostfirst/_native.c, built by scripts/build-python-native.sh), so it is a platform wheel, not
py3-none-any. The extension speaks CPython's stable ABI from 3.9 on (Py_LIMITED_API) and the rest is ctypes, so
its tags are cp39-abi3-<platform> (py3-none-<platform> where no extension was staged). scripts/wheel.sh then has auditwheel give it the manylinux tag."""

from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the library inside: install into platlib, tag for a platform
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        platform = super().get_tag()[2]
        staged = Path(__file__).resolve().parent / "hostfirst"
        if any(staged.glob("_native.abi3.so")) or (staged / "_native.pyd").is_file():
            return "cp39", "abi3", platform
        return "py3", "none", platform  # no extension staged: ctypes only, any CPython 3


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
