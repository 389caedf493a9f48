"""Test support that is neither a fake nor a fixture: real third-party parts the tests install."""
