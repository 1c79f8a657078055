"""The package version, in a module of its own so that modules import it without importing the package."""

__version__ = "0.1.0.dev0"
