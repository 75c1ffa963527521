"""Collect refuses a submission filed under another learner's name.

nbgrader's exchange knows a learner by the Unix account that ran `nbgrader submit`, but `submit
--student=NAME` files a submission under any name, and nbgrader's own collect only warns ("claims
to be submitted by ... but is owned by ...") and then grades it as NAME's, in place of NAME's own.
OwnerCheckedCollect collects, for each learner, their newest submission that their own account
wrote, and refuses the others with an error that names both accounts; a refused submission stays in
the exchange's inbound folder, for the teacher to look at.

make_nbgrader_course.py copies this file next to the course's nbgrader_config.py, whose lines
    import course_exchange
    c.ExchangeFactory.collect = course_exchange.OwnerCheckedCollect
turn it on. Where every learner runs under one account on purpose (a test, or a hub whose servers
all run as one user and name learners by JUPYTERHUB_USER), `--ExchangeCollect.check_owner=False`
turns the check off, as in nbgrader.
"""
from __future__ import annotations

import os
import pwd

from nbgrader.exchange.default.collect import ExchangeCollect


class OwnerCheckedCollect(ExchangeCollect):
    """nbgrader's collect, which refuses what one account submitted under another's name."""

    def init_src(self):
        self.refused = []
        super().init_src()
        for record in self.refused:
            self.log.error("Refused %s: it claims to be by %s but the account %s submitted it; not "
                           "collected (it stays in %s; see the teacher's guide, section 4)",
                           record["filename"], record["username"], record["owner"], self.inbound_path)
        self.src_records = [record for record in self.src_records if record not in self.refused]

    def _path_to_record(self, path):
        record = super()._path_to_record(path)
        try:
            record["owner"] = pwd.getpwuid(os.stat(os.path.join(self.inbound_path, record["filename"])).st_uid).pw_name
        except KeyError:
            record["owner"] = "an unknown account"
        if self.check_owner and record["owner"] != record["username"]:
            self.refused.append(record)
        return record

    def _sort_by_timestamp(self, records):
        """Newest first, each learner's own submissions before any filed under their name by another."""
        return sorted(records, key=lambda record: (record not in self.refused, record["timestamp"]), reverse=True)
