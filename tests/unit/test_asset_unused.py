"""The Lambda asset drops what the runtime provides and what no function imports."""

from pathlib import Path

from stacks import constants, packaging


def test_runtime_provided_and_unused_distributions_are_dropped(tmp_path: Path) -> None:
    # given what pip installs for optuna and powertools (dist-info names keep their case)
    for name in ("botocore", "sqlalchemy", "SQLAlchemy-2.0.36.dist-info", "alembic", "mako",
                 "Mako-1.3.8.dist-info", "optuna", "optuna-5.1.0.dist-info", "numpy"):
        (tmp_path / name).mkdir()
    # when
    packaging.remove_runtime_provided(tmp_path)
    # then
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numpy", "optuna", "optuna-5.1.0.dist-info"]
    assert {"sqlalchemy", "alembic", "mako"} <= constants.UNUSED_DISTRIBUTIONS
