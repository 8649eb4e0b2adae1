"""The comment form: what a shopper may post, and how their text is cleaned before it is stored."""
from __future__ import annotations

import re

from django import forms

from comments.table.keys import RATINGS

AUTHOR_MAX = 80
BODY_MAX = 5_000
# C0 and C1 control characters and DEL; newlines and tabs are kept where a field allows them.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LINE_BREAKS = re.compile(r"\r\n?")
RATING_CHOICES = [(n, f"{n} star" if n == 1 else f"{n} stars") for n in RATINGS]


def strip_controls(text: str, *, multiline: bool) -> str:
    """Remove control characters; keep tabs, and newlines (as \\n) when `multiline`.

    Nothing else is touched: accents, CJK and emoji (zero-width joiners included) are stored exactly
    as typed, and HTML is escaped when it is shown, not here."""
    text = CONTROL.sub("", LINE_BREAKS.sub("\n", text))
    return text if multiline else re.sub(r"[\n\t]+", " ", text)


class CleanedCharField(forms.CharField):
    def __init__(self, *, multiline: bool = False, **kwargs):
        self.multiline = multiline
        super().__init__(**kwargs)

    def to_python(self, value):
        if isinstance(value, str):
            value = strip_controls(value, multiline=self.multiline)
        return super().to_python(value)


class CommentForm(forms.Form):
    author = CleanedCharField(
        label="Your name", max_length=AUTHOR_MAX,
        widget=forms.TextInput(attrs={"autocomplete": "name"}),
        error_messages={"required": "Enter your name."},
    )
    rating = forms.TypedChoiceField(
        label="Rating", choices=RATING_CHOICES, coerce=int, widget=forms.RadioSelect,
        error_messages={"required": "Choose a rating from 1 to 5 stars.",
                        "invalid_choice": "Choose a rating from 1 to 5 stars."},
    )
    body = CleanedCharField(
        label="Your comment", max_length=BODY_MAX, multiline=True,
        help_text="Up to 5,000 characters. What did you like, and what not?",
        widget=forms.Textarea(attrs={"rows": 5}),
        error_messages={"required": "Write your comment."},
    )
    # The honeypot: hidden from people (CSS, aria-hidden, no tab stop), filled in by naive bots.
    website = forms.CharField(
        label="Leave this field empty", required=False,
        widget=forms.TextInput(attrs={"tabindex": "-1", "autocomplete": "off"}),
    )

    HONEYPOT = "website"

    def is_bot(self) -> bool:
        return bool(self.data.get(self.HONEYPOT, "").strip())

    def comment_fields(self) -> dict:
        """cleaned_data as comment_create's keyword arguments."""
        return {name: self.cleaned_data[name] for name in ("author", "rating", "body")}
