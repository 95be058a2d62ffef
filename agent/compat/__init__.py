"""Every private attribute of a third-party library the agent relies on, one module per library.

Nothing outside this package reaches a library's internals (a leading underscore, or an
attribute the library does not document). Each module lists what it reaches in ``PRIVATE``:
``(owner, attribute)`` pairs, checked on the installed versions by tests/test_compat.py,
which fails naming the attribute the day an upgrade removes one. The dependency ranges in
pyproject.toml are bounded to the versions those tests ran on.
"""
