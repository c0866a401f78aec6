"""The program language, the execution engine, the planner client and the query API."""
