"""Test helpers shipped with jarvismem: conformance suites and fakes for users' own tests."""
