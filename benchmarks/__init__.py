"""asv suites for rnnbench (see benchmarks/rnn.py and asv.conf.json)."""
