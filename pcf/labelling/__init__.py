"""The people side of the application (docs/reviewing.md, docs/team.md). Every function that
writes takes the acting :class:`pcf.access.Actor` and checks its role.
"""
