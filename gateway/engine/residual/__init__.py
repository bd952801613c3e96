"""The residual evaluator: simple residual programs answered without DuckDB, exactly as DuckDB would."""
