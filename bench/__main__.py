"""`python -m bench`: entry point of the benchmark (see bench/run.py)."""

from bench.run import main

if __name__ == "__main__":
    main()
