"""``ctxkit check-packing``: does a model keep ctxkit's packed segments apart?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxkit.cli.app import CapacityOpt, FieldOpt, TemplateOpt, app
from ctxkit.cli.render import out

__all__ = ["check_packing_cmd"]


@app.command("check-packing")
def check_packing_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL, JSON or Parquet records (text or token ids)")],
    model: Annotated[Path, typer.Option(
        "--model", help="Local model directory (transformers causal LM and its tokenizer).")],
    capacity: CapacityOpt = 512,
    field: FieldOpt = None,
    template: TemplateOpt = None,
    separator: Annotated[str, typer.Option(
        "--separator", help="eos, none or a token id placed after every segment.")] = "eos",
    layout: Annotated[str, typer.Option(
        "--layout", help="flat ([1, T], as transformers' flattening collator) or padded.")
    ] = "flat",
    max_records: Annotated[int, typer.Option(
        "--max-records", min=1, help="Records read from IN.")] = 32,
    atol: Annotated[float | None, typer.Option(
        "--atol", help="Largest logit difference still counted equal (default: by dtype).")
    ] = None,
    attn: Annotated[str | None, typer.Option(
        "--attn", help="Attention implementation to check (default: the model's own).")
    ] = None,
    use_cache: Annotated[bool, typer.Option(
        "--use-cache", help="Run the packed batch with the KV cache on, as a training loop "
                            "that leaves the model's use_cache config on would.")] = False,
) -> None:
    """Run the model on packed records and on each record alone; exit 1 if segments leak.

    Exit status: 0 the packed batch gives each segment's own logits and loss; 1 a segment
    leaks (the reason names the cause); 2 bad input.
    """
    from ctxkit.training.command import check_packing_command

    code = check_packing_command(model, input_path, capacity=capacity, field=field,
                                 template=template, separator=separator, layout=layout,
                                 max_records=max_records, atol=atol,
                                 attn_implementation=attn, use_cache=use_cache,
                                 console=out)
    if code:
        raise typer.Exit(code)
