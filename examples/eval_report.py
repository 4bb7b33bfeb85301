"""How much of a context budget is wasted, and what would each stage save?

Run: python examples/eval_report.py   (writes report/ with report.md, report.json and PNGs)
"""

import ctxkit
from ctxkit.demo import demo_records
from ctxkit.io.records import format_alpaca_prompt

records = demo_records(300, seed=0)
texts = [format_alpaca_prompt(r["instruction"], r["input"]) + r["output"] for r in records]
content = [f"{r['instruction']}\n{r['input']}\n{r['output']}" for r in records]

report = ctxkit.evaluate(texts, content=content, capacity=2048)
plots = report.plot("report")
with open("report/report.md", "w") as fh:
    fh.write(report.to_markdown([str(p) for p in plots]))
util = report.sections["utilization"]
print(f"lower bound {util['lower_bound']} windows; bfd {util['methods']['bfd']['windows']}; "
      f"naive padding {util['methods']['naive padding']['windows']}")
