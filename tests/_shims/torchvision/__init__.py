"""A stand-in torchvision, on the path only where none is installed (tests/_shims/README.md)."""

__version__ = "0.0.0+datacheck-test-shim"
