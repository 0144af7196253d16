"""Areas, perimeters and points in the plane."""
