"""Suite-wide settings. Subject-specific fixtures live in each folder's conftest."""

from hypothesis import HealthCheck, settings

# Property tests: no per-example deadline (CI machines are noisy and have 2 cores),
# and a bounded number of examples so `make test` stays well inside the CI budget.
settings.register_profile(
    "sharedesk",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("sharedesk")
