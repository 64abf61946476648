import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

# Test helpers (small_configs, host_mask) sit beside the tests; the package itself comes from the install.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Property tests: a fresh random seed on every local run (hypothesis's default profile); in CI (.ci/run runs
# with CI=true) the `ci` profile derandomizes them, so a CI result is reproducible and a failure prints the
# blob that replays it (`@reproduce_failure`). No deadline: CI shares two cores, and time is not what these
# tests check; for the same reason generation that is slow on a busy machine is no failure. A profile given
# on the command line (`--hypothesis-profile=NAME`) wins.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])


def pytest_configure(config):
    if os.environ.get("CI") and not config.getoption("--hypothesis-profile", None):
        settings.load_profile("ci")
    # The C++ planner (maskc.plan.native) ready before the first test, where a compiler builds it: every plan of
    # the run then takes the same path (tests that need the numpy planner set MASKC_NATIVE=0).
    from maskc.plan import native

    native.library(wait=True)
