"""The command line (`cfsm`, cli.py) and the benchmark suites (bench/)."""
