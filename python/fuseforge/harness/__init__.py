"""The benchmark harness, apart from the library: the `fuseforge` command line
(cli), correctness checks and timing of problem files (check, timing), the
suite report (bench), roofline estimates (roofline) and problem files (problem)."""
