"""Extras for other packages, each importable only with its package installed (the wheel's extras):
`pagination_index.contrib.drf` needs Django REST framework (`django-pagination-index[drf]`)."""
