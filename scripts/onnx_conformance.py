"""Print kiln's pass count on onnx's backend node cases next to onnxruntime's on the same cases.

    uv run python scripts/onnx_conformance.py [--filter SUBSTRING] [--list-failures]

Both run every case onnx's `onnx.backend.test.case.node` generates, compared with onnx's tolerances
(kiln.tensor.onnx.conformance.compare_outputs). The bar for kiln: at least as many passes as onnxruntime.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np

from kiln.tensor.onnx.conformance import ConformanceCase, conformance_cases, run_case, run_case_with_kiln


def run_case_with_onnxruntime(case: ConformanceCase) -> None:
    import onnxruntime  # type: ignore[import-untyped]

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def run(feeds: dict[str, Any]) -> list[np.ndarray[Any, Any]]:
        return [np.asarray(value) for value in session.run(None, feeds)]

    run_case(case, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--list-failures", action="store_true", help="print each case kiln fails and why")
    arguments = parser.parse_args()
    warnings.simplefilter("ignore")
    cases = [case for name, case in conformance_cases().items() if arguments.filter in name]
    passed = {"kiln": 0, "onnxruntime": 0}
    seconds = {"kiln": 0.0, "onnxruntime": 0.0}
    only = {"kiln": 0, "onnxruntime": 0}
    failures: list[str] = []
    for case in cases:
        results = {}
        for name, function in (("kiln", run_case_with_kiln), ("onnxruntime", run_case_with_onnxruntime)):
            start = time.perf_counter()
            try:
                function(case)
                results[name] = True
            except Exception as error:
                results[name] = False
                if name == "kiln":
                    failures.append(f"{case.name}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
            seconds[name] += time.perf_counter() - start
            passed[name] += results[name]
        if results["kiln"] != results["onnxruntime"]:
            only["kiln" if results["kiln"] else "onnxruntime"] += 1
    if arguments.list_failures:
        print("\n".join(failures))
    print(f"onnx node cases: {len(cases)}")
    for name in ("kiln", "onnxruntime"):
        print(f"{name:12s} passed {passed[name]:5d}  (only this one: {only[name]:4d})  {seconds[name]:7.1f} s")


if __name__ == "__main__":
    main()
