"""The producers matrix: every format written by the library that makes it, read back by it."""
