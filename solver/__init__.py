"""parasol's solver side: problem files, the library, the planner and the command line."""
