"""The people side of the application, every read and write of labelling: members and roles
(:mod:`~pcf.labelling.membership`), labelling plans and queues, labels saved as the signed-in
person, adjudication (:mod:`~pcf.labelling.adjudications`), resolutions into gold
(:mod:`~pcf.labelling.resolutions`), the humans' gold (:mod:`~pcf.labelling.human_gold`), the
team's figures and exports, and the audit log.

Every function that writes takes the acting :class:`pcf.access.Actor` and checks its role.
"""
