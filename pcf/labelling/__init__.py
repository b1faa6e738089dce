"""The people side of the application: members, plans, queues, labels, adjudication,
resolutions, human gold, the team's figures, exports and the audit log. Every function that
writes takes the acting :class:`pcf.access.Actor` and checks its role.
"""
