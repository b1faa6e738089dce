"""The people side of the application: members and roles, labels saved as the signed-in
person, and the audit log (later: labelling plans, queues, resolutions into gold).

Every function that writes takes the acting :class:`pcf.access.Actor` and checks its role.
"""
