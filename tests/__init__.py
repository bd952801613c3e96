"""The test suite: one package per code package (stores, planner, gateway), real Spark and real HTTP."""
