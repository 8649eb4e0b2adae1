from django.core.validators import RegexValidator
from django.db import models
from django.urls import reverse


class Product(models.Model):
    sku = models.CharField("SKU", max_length=100, unique=True,
                           help_text="The product's key in the comments table (PK2). Cannot contain '/'.",
                           # "/" separates the SKU from the rating in the byRating key (PK2R = "SKU/4").
                           validators=[RegexValidator(r"\A[^/]+\Z", "A SKU cannot contain '/'.")])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    # Last-Modified of its pages and lastmod in the sitemap: the page header shows these fields.
    updated_at = models.DateTimeField(auto_now=True)
    # When moderation last hid, showed again or deleted one of its comments (moderation/services.py):
    # a removal changes pages without a newer comment to date them, so their Last-Modified and the
    # sitemap's lastmod take this too. Null: never moderated.
    comments_changed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        indexes = [
            # The catalogue's pages: ORDER BY name, id LIMIT/OFFSET walks this index, no sort of the table.
            models.Index(fields=["name", "id"], name="shop_product_name_id"),
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("product-detail", kwargs={"sku": self.sku})
