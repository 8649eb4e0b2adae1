"""The Jinja2 environment of the site's own templates (jinja2/, the first entry of TEMPLATES; the admin and
Django's form widgets keep Django's template engine, the second).

Templates get `static()` and `url()`, and the few Django filters the pages use, written to give Django's
output byte for byte for the values the pages pass (tests/shop/test_jinja2.py compares them with
Django's own filters) and handing anything else to Django's filter itself. The site is in English
(LANGUAGE_CODE en-us, no locale middleware), so English number formatting is the only one needed.

Every render sends `template_rendered` (template, context), the counterpart of what Django's test
client records for its own engine: receivers can tell whether a request rendered anything at all (a
304, a cached page) and what it rendered.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django.contrib.humanize.templatetags import humanize
from django.dispatch import Signal
from django.template import defaultfilters
from django.templatetags.static import static
from django.urls import reverse

import jinja2

template_rendered = Signal()  # sender: the jinja2.Template; template, context: its name, the context dict

_EXPONENTS = {places: Decimal(1).scaleb(-places) for places in range(8)}


def url(name: str, *args, **kwargs) -> str:
    """`{% url 'name' arg key=value %}`: url('name', arg, key=value)."""
    return reverse(name, args=args or None, kwargs=kwargs or None)


def intcomma(value) -> str:
    """humanize's `intcomma`: "12,345". An int is written directly; anything else (a float, a Decimal,
    floatformat's text) goes to humanize's filter."""
    if type(value) is int:
        return f"{value:,}"
    return humanize.intcomma(value)


def floatformat(value, places: int = -1) -> str:
    """Django's `floatformat` with a whole number of places >= 0 (what the pages use): rounded half up,
    as Django rounds, no grouping. Other arguments, and values other than finite ints, floats and
    Decimals, go to Django's filter."""
    kind = type(value)
    if (kind is int or kind is float or kind is Decimal) and type(places) is int and 0 <= places < 8:
        number = Decimal(str(value))  # as Django reads it: a float by its shortest repr
        _, digits, exponent = number.as_tuple()
        # Django writes infinities, NaN and numbers of over 200 digits as they are.
        if type(exponent) is int and len(digits) + abs(exponent) <= 200 and abs(number) < 10**15:
            rounded = number.quantize(_EXPONENTS[places], ROUND_HALF_UP)
            if not rounded:
                rounded = rounded.copy_abs()  # "0.0", never "-0.0"
            return f"{rounded:f}"
    return defaultfilters.floatformat(value, places)


def pluralize(value, suffix: str = "s") -> str:
    """Django's `pluralize`: "s" unless the number is 1."""
    kind = type(value)
    if (kind is int or kind is float) and "," not in suffix:
        return "" if value == 1 else suffix
    return defaultfilters.pluralize(value, suffix)


class Template(jinja2.Template):
    """Sends `template_rendered` (receivers: none in production, a few microseconds in tests)."""

    def render(self, *args, **kwargs) -> str:
        html = super().render(*args, **kwargs)
        if template_rendered.receivers:
            context = dict(*args, **kwargs)
            template_rendered.send(sender=self, template=self.name, context=context)
        return html


def environment(**options) -> jinja2.Environment:
    env = jinja2.Environment(**options)
    env.template_class = Template
    env.globals.update(static=static, url=url)
    env.filters.update(
        intcomma=intcomma,
        floatformat=floatformat,
        pluralize=pluralize,
        date=defaultfilters.date,  # the staff status page's only
        naturaltime=humanize.naturaltime,
    )
    return env
