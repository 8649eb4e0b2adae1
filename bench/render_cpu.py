"""CPU time of rendering one product page's template, nothing else: the context the view built for one
deep page (caught on its way to `comments.views.render`), rendered again and again on one thread.

    python -m bench.render_cpu --smoke                 # page 77 of the smoke shop's flagship
    python -m bench.render_cpu --page 2 --renders 5000

Thread CPU time (time.thread_time), median of the rounds. It patches only `comments.views.render`,
which every version of the view has, so the same command measures any commit (bench/notes/performance.md,
"Templates: Jinja2").
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bench.common import format_table, machine_info, shown, stamp, write_json
from bench.dataset import FLAGSHIP, Dataset
from bench.request_cpu import SIZE, SMOKE_SIZE

ROUNDS = 7


def caught_context(url: str) -> tuple:
    """(request, template name, context) of the view's render of `url`, the rendered-page cache off."""
    from django.test import Client, override_settings

    import comments.views as views

    caught = {}
    render = views.render

    def catch(request, template_name, context, *args, **kwargs):
        caught["call"] = (request, template_name, dict(context))
        return render(request, template_name, context, *args, **kwargs)

    views.render = catch
    try:
        with override_settings(COMMENTS_RENDERED_CACHE_SECONDS=0):
            response = Client().get(url)
    finally:
        views.render = render
    assert response.status_code == 200, (url, response.status_code)
    return caught["call"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} comments")
    parser.add_argument("--page", type=int, default=77, help="the flagship's page to render (default 77)")
    parser.add_argument("--renders", type=int, default=1000, help="renders per round (default 1,000)")
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()
    with Dataset(SMOKE_SIZE if args.smoke else SIZE):
        from django.template import engines

        import comments.views as views

        request, template_name, context = caught_context(f"/products/{FLAGSHIP}/?page={args.page}")
        html_bytes = len(views.render(request, template_name, dict(context)).content)
        for _ in range(50):
            views.render(request, template_name, dict(context))
        rounds = []
        for _ in range(ROUNDS):
            started = time.thread_time()
            for _ in range(args.renders):
                views.render(request, template_name, dict(context))
            rounds.append((time.thread_time() - started) * 1000 / args.renders)
        engine = type(engines.all()[0]).__name__
    row = {"template": template_name, "page": args.page, "engine": engine, "html_bytes": html_bytes,
           "renders": args.renders, "rounds": ROUNDS, "render_cpu_ms": statistics.median(rounds),
           "render_cpu_ms_rounds": rounds}
    table = format_table(["template", "page", "engine", "bytes", "render CPU ms (median)"],
                         [[template_name, str(args.page), engine, f"{html_bytes:,}", f"{row['render_cpu_ms']:.3f}"]])
    print(table)
    path = write_json("render_cpu", args.smoke, stamp(), {
        "results": [row], "table": table,
        "machine": machine_info({}, load_at_start, "one thread, the view's context rendered again")})
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
