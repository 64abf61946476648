"""Tooling beside the compile path: `maskc explain`, `maskc run`, and the brute-force reference they and
the tests check against. Nothing on the compile or launch path imports this package."""
