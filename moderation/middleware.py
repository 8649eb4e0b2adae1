from moderation.purge import TAG_HEADERS, product_key

# The views whose responses show a product's comments (and take its SKU from the URL).
TAGGED_VIEWS = frozenset({"product-detail", "api-product-comments"})


class SurrogateKeyMiddleware:
    """Tags each product page and API answer with the product's surrogate key, so that a CDN can purge
    every cached copy of a product's pages by one key (moderation.purge)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        match = request.resolver_match
        if match is not None and match.url_name in TAGGED_VIEWS and "sku" in match.kwargs:
            key = product_key(match.kwargs["sku"])
            for header in TAG_HEADERS:
                response.headers.setdefault(header, key)
        return response
