"""A policy module that raises while it is imported (the hostile campaign corpus names it)."""

raise ValueError("this module refuses to be imported")
