from django.shortcuts import render

from comments.selectors import product_comment_counts
from shop.models import Product


def catalogue(request):
    products = list(Product.objects.all())
    counts = product_comment_counts([product.sku for product in products])
    rows = [(product, counts[product.sku]) for product in products]
    return render(request, "shop/catalogue.html", {"rows": rows})
