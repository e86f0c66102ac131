"""`torchlint verify fixtures/`: every positive fixture of a rule whose witness is deterministic on CPU is confirmed."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")

# Skips that are not about the machine: rules without a witness yet, and parse errors.
NO_WITNESS = "skipped (no witness for this rule)"


@pytest.fixture(scope="module")
def verified():
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", "fixtures", "--device", "cpu", "--output-format", "json"],
        capture_output=True, text=True, cwd=ROOT, timeout=600, env=dict(os.environ),
    )
    assert completed.returncode in (0, 1), completed.stderr
    return json.loads(completed.stdout)


def test_no_fixture_finding_is_contradicted(verified):
    contradicted = [
        (finding["filename"], finding["location"]["row"], finding["code"], finding["verification"]["evidence"])
        for finding in verified
        if finding["verification"]["status"] == "not-reproduced"
    ]
    assert contradicted == []


def test_every_witness_ran_to_a_verdict(verified):
    failures = [
        (finding["filename"], finding["location"]["row"], finding["code"], finding["verification"]["status"])
        for finding in verified
        if "witness failed" in finding["verification"]["status"] or "timed out" in finding["verification"]["status"]
    ]
    assert failures == []


def test_no_witness_builder_fails_on_a_fixture(verified):
    """A builder that raises falls back to the canonical witness, which still confirms: only its note tells."""
    failed = [
        (finding["filename"], finding["location"]["row"], finding["code"])
        for finding in verified
        if "building from the finding failed" in finding["verification"].get("evidence", "")
    ]
    assert failed == []


def test_rules_deterministic_on_cpu_are_confirmed(verified):
    # An optional module missing (numpy, torchvision) or a GPU missing.
    cpu_only_skips = ("needs a GPU", "is not installed", NO_WITNESS)
    unexplained = [
        (finding["filename"], finding["location"]["row"], finding["code"], finding["verification"]["status"])
        for finding in verified
        if finding["verification"]["status"].startswith("skipped")
        and not any(reason in finding["verification"]["status"] for reason in cpu_only_skips)
    ]
    assert unexplained == []
