"""Read a Scout scan directory with Inspect Steward's own code, as its tend does.

    python3.12 tests/steward_read.py SCAN_DIR SCANNER LOG [LOG ...]

Run by tests/test_scout.py under a Python that has ``inspect-steward`` (it needs Python
3.12; see docs/scout.md "Inspect Steward"). Prints, as JSON, the anomaly instances
Steward composes from the scanner's rows (``scan_findings``: boolean rows only), what it
could not read, and the transcripts it counts as reached.
"""

import json
import sys

from inspect_steward._evalset.observe import read_attempt
from inspect_steward._scan.findings import log_key, scan_findings


def main() -> None:
    scan_dir, scanner, *logs = sys.argv[1:]
    attempts = {log_key(log): read_attempt(log) for log in logs}
    found = scan_findings(scan_dir, scanners=(scanner,), attempts=attempts)
    print(json.dumps({
        "instances": [{"class_key": i.class_key, "sample_id": i.sample_id, "epoch": i.epoch,
                       "message": i.message} for i in found.instances],
        "unreadable": [u.reason for u in found.unreadable],
        "recorded": sum(len(v) for v in found.recorded.values())}))


if __name__ == "__main__":
    main()
