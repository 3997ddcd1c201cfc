"""One check's result: {"name", "ok", "detail"} (ok None: the check did not run)."""

CHECKS = ["reference", "declared", "omitted", "types", "empty", "nonfinite", "attributes",
          "indices", "larger", "threads",
          "determinism", "runtimes", "library"]


def record(name: str, ok: bool | None, detail: str) -> dict:
    assert name in CHECKS, name
    return {"name": name, "ok": ok, "detail": detail}
