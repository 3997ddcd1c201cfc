"""The wheel carries compiled libraries: tag it for this platform and Python
(without this, setuptools would call it pure Python and pip would install it anywhere)."""

from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
