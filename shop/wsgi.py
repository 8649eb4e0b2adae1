import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
application = get_wsgi_application()

from shop.site_keys import require_web_keys  # noqa: E402  (settings are loaded now)

require_web_keys()  # a web process without its keys stops here, naming them
