from django import forms

from comments.forms import CleanedCharField
from moderation.models import Report

NOTE_MAX = 500


class ReportForm(forms.Form):
    reason = forms.ChoiceField(label="What is wrong with this comment?", choices=Report.Reason.choices,
                               widget=forms.RadioSelect,
                               error_messages={"required": "Choose a reason.", "invalid_choice": "Choose a reason."})
    note = CleanedCharField(label="Anything we should know (optional)", max_length=NOTE_MAX, required=False,
                            multiline=True, widget=forms.Textarea(attrs={"rows": 3}))
