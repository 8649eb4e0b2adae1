from django.db import models
from django.urls import reverse


class Product(models.Model):
    sku = models.CharField("SKU", max_length=100, unique=True,
                           help_text="The product's key in the comments table (PK2). Cannot contain '/'.")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    # Last-Modified of its pages and lastmod in the sitemap: the page header shows these fields.
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("product-detail", kwargs={"sku": self.sku})
